"""The console's pages, one module each (broker/console/routes.py maps URLs to them)."""
