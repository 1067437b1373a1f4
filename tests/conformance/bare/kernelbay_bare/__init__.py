"""pyref's memory and launcher with none of the optional hooks: every one of them is the core's fallback."""
