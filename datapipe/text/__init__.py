"""Text batches: packed (cu_seqlens), padded and fixed-length layouts."""
