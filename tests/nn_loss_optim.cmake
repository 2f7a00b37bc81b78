# The CPU backend's losses, metrics, optimizers, clipping, schedules and precision
# conversions (src/nn/cpu/{loss,optim,precision}.c).
stoke_nn_test(test_nn_loss_optim test_nn_loss_optim.c)
stoke_nn_test(test_nn_precision test_nn_precision.c)
