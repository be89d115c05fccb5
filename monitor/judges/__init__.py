"""judges package."""
