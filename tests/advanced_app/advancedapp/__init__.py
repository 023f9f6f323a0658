"""advancedapp: a Flower / PyTorch app in the shape of Flower's advanced examples."""
