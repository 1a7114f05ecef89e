//! Load result files: JSON, exact histogram merge, terminal tables and self-contained HTML with SVG plots.
