"""fla.ops of the stub: like the real package, the root does not import its kernels; transformers imports
`fla.ops.gated_delta_rule` by its full path."""
