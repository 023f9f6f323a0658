"""pytorchexample."""
