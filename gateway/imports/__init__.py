"""Records imports (issue 12): contracts, intake, batches. One feature, one package."""
