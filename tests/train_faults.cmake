# Issue 26's faults in settings: signed unsigned values and device errors at the config
# parser.
stoke_unit_test(test_train_faults test_train_faults.c)
