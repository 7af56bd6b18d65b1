"""Reading published and locally built splits into typed examples."""
