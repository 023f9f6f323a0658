"""fedram-app: Fed-CVaR-Avg under Bernoulli availability, on fedram-flwr."""
