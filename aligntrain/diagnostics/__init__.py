"""The seeds' diagnostics (docs/math.md §4–5), one module per diagnostic.

* ``forced_vote``: forced-vote sensitivities a_j = ∂P/∂p_j and strategy values, exact or Monte Carlo (CAT eqs. 35–37).
* ``majority_dp``: the exact majority-vote polynomial and its derivatives, by dynamic programming.
* ``diagonal``: the diagonal term a_t against the exact proportional-decay derivative D; training weights (CAT eq. 33).
* ``pool_efficiency``: D/a_t for every prompt of a stored pool (the diagnose stage's efficiency table).
* ``alignment``: the alignment coefficient Γ between training and test weights, predicted crossovers (CAT eq. 90).
* ``oracle_gradient``: oracle advantages of a strategy on a stored pool and cosines of rule gradients (TEA §4.6).
* ``tails``: QQ fits of the pool's upper reward tail against the normal (TEA Table 14).
* ``overconfidence``: greedy-completion probability by correctness (DCO Fig. 1), reward shift (TEA Fig. 3b).
* ``synthetic``: the Tang bandit (Tang et al. Fig. 1) and the TEA Gaussian-tail bias/variance study (TEA App. E).

Modules are imported on demand (torch, scipy, matplotlib); the pipeline stages
that run them live in ``aligntrain.stages.diagnostics``.
"""
