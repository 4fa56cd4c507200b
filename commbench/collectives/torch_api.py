"""torch.distributed entry points whose names changed between releases, detected once."""

import torch.distributed as dist

# torch 2.13 deprecates *_tensor in favour of *_single; older torch on GPU clusters has only the old names.
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
