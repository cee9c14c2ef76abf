"""Local CPU training engine: SFT, RL stages, continuous-batching rollout engine, scheduler simulator."""
