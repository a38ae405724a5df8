"""Shovel and federation endpoints (lavin.shovel.sources / lavin.shovel.destinations) live here."""
