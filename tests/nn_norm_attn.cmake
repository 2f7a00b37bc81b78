# The CPU backend's norm, element-wise and attention kernels against float64
# references, finite differences and (where installed) torch via nn_norm_attn_ref.py.
stoke_nn_test(test_nn_norm_eltwise test_nn_norm_eltwise.c)
stoke_nn_test(test_nn_attn test_nn_attn.c)
