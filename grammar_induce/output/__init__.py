"""Results out: the output formats (one table) and pictures (SVG, HTML)."""
