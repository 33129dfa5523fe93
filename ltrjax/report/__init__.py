"""Reporting: results files, tables, statistics, analysis and plots of finished runs (no simulation)."""
