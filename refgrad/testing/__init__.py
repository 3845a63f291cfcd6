"""The oracle kit: hypothesis strategies and differential checks against the PYTHON reference."""
