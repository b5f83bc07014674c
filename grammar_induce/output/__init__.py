"""Results out: the result records and how they are shown: a parse's in the output formats (one table), the evaluation's
table, JSON and HTML page, member agreement and `rank`'s standings, pictures (SVG, HTML)."""
