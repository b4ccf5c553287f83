"""Loading fleet.yaml plus FLEET_* environment into one validated configuration."""
