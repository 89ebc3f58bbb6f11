"""speed.py minatar: MinAtar's examples/dqn.py, unmodified, on one torch thread, with its frame budget (a
module constant) set before its main() runs. It saves its returns and frame stamps to OUTPUT_data_and_weights.

Run: python benchmarks/launchers/minatar_peer.py PATH/TO/dqn.py GAME OUTPUT FRAMES
"""

import sys
from pathlib import Path

import torch

peer, game, output, frames = sys.argv[1:]
torch.set_num_threads(1)
sys.path.insert(0, str(Path(peer).resolve().parent))
sys.argv = ["dqn.py", "--game", game, "--output", output]
import dqn  # noqa: E402  (MinAtar's, from the folder just put first on the path)

dqn.NUM_FRAMES = int(frames)
dqn.main()
