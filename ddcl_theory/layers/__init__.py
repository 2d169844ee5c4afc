"""nn.Modules: DDCL-Attention (ddcl.py) and Laplacian attention (laplacian.py)."""
