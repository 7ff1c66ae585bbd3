"""Side-by-side benchmarks: the upstream directly, a minimal aiohttp pass-through, the gateway."""
