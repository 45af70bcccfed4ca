"""Reusable preparation declarations (host): contract components and frontend detection."""
