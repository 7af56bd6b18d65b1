"""Scene synthesis: seeded scene plans (pure data) and the backends that render them."""
