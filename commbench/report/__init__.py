"""Reports: plots, a self-contained HTML page and a Markdown summary of one or more runs."""
