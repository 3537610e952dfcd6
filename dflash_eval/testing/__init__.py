"""Test, benchmark and demo infrastructure, apart from the product: tiny real models built from configs
(`tiny`), drafter checkpoints written in both formats (`checkpoint_writer`, `testbed`) and a minimal DFlash
trainer that can inject the classic bugs (`train`). Nothing under `dflash_eval/` outside this package
imports it, except the demo's model build."""
