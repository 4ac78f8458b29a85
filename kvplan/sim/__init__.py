"""`kvplan simulate`: a continuous-batching engine simulation with preemption."""
