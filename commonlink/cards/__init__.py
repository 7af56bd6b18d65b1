"""Dataset cards: YAML metadata, datasheet sections filled from build statistics, figures."""
