"""Side-by-side benchmarks of datapipe and its peers; run the scripts here directly."""
