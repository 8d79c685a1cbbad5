"""Layer 5 — presentation: figures, the report's HTML sections, the HTML export and the
side-by-side table of several runs. Reads analysis results; never measures."""
