"""Side-by-side benchmarks of datapipe and its peers; run each from the repository root as
`python -m benchmarks.NAME`, or all of them through `datapipe bench --suite`."""
