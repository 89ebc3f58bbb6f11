"""speed.py gemm: one library's fp32 [n, n] @ [n, n] product in this process, timed as the best of 7 blocks of
200 calls after one block that warms up (JAX compiles in it). Prints one JSON line: lib, us, gflops.

Run: python benchmarks/launchers/gemm.py {torch,torch-linear,numpy,jax} N
"""

import json
import sys
import time


def product_call(lib: str, n: int):
    """A call of `lib`'s product (torch-linear: nn.Linear's), its operands made once."""
    if lib == "jax":
        import jax
        import jax.numpy as jnp

        a, b = (jax.random.normal(jax.random.PRNGKey(i), (n, n), jnp.float32) for i in (0, 1))
        product = jax.jit(lambda x, y: x @ y)
        return lambda: product(a, b).block_until_ready()
    if lib == "numpy":
        import numpy as np

        a, b = (np.random.default_rng(i).standard_normal((n, n), dtype=np.float32) for i in (0, 1))
        return lambda: a @ b
    import torch

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    a, b, layer = torch.randn(n, n), torch.randn(n, n), torch.nn.Linear(n, n)
    return (lambda: a @ b) if lib == "torch" else (lambda: layer(a))


lib, n = sys.argv[1], int(sys.argv[2])
call = product_call(lib, n)
calls = 200
blocks = []
for _ in range(8):
    start = time.perf_counter()
    for _ in range(calls):
        call()
    blocks.append((time.perf_counter() - start) / calls)
best = min(blocks[1:])  # the first block warms up
print(
    json.dumps({"lib": lib, "us": round(best * 1e6, 1), "gflops": round(2 * n**3 / best / 1e9, 1)})
)
