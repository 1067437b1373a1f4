"""kernelbay benchmarks: every speed claim measured side by side with its peers (not tests)."""
