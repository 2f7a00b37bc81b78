/* env.h - the environment, read in one place. stoke_env() is the only getenv in src/
 * (tests/env_readers.py checks it): every variable a module reads is passed to it by
 * its literal name, and every such name is documented in docs/environment.md with the
 * module that reads it (the same check). The configuration table's variables
 * (train/config.c: BATCH_SIZE, NUM_WORKERS, ...) go through it as well. Test hooks are
 * not environment variables: a test replaces a seam (docs/testing.md). */
#ifndef STOKE_CORE_ENV_H
#define STOKE_CORE_ENV_H

/* The value of environment variable `name` as getenv gives it: NULL when unset, ""
 * when set empty (readers decide what empty means). The pointer is the environment's own: valid
 * until the variable changes; copy it to keep it. Thread-safe as getenv is (no setenv
 * runs while stoke does). */
const char *stoke_env(const char *name);

#endif
