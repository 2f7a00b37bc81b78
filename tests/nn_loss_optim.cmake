# The CPU backend's losses, metrics and precision conversions, and the optimizer step
# as training runs it (stoke_model_step: loss scale, clipping, SGD, AdamW) with the lr
# schedule (stoke_lr_at), against float64 references and (test_nn_loss_optim_torch)
# PyTorch.
stoke_nn_test(test_nn_loss_optim test_nn_loss_optim.c)
stoke_torch_test(test_nn_loss_optim)
stoke_nn_test(test_nn_precision test_nn_precision.c)
