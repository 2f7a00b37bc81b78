/* test_train_faults.c - issue 26's settings faults, at the config parser every source
 * goes through: unsigned values with a blank or a sign (9), and the device's form and
 * limit named with its source (12). */
#include "check.h"
#include "stoke/train.h"

static const char *env_value; /* what fake_env returns for env_name */
static const char *env_name;

static const char *fake_env(const char *name) { return !strcmp(name, env_name) ? env_value : NULL; }

/* stoke_train_config_load_env with one variable set: its status; the message in
 * stoke_last_error. */
static stoke_status load_env(stoke_train_config *c, const char *name, const char *value)
{
    env_name = name;
    env_value = value;
    stoke_train_config_defaults(c);
    return stoke_train_config_load_env(c, fake_env);
}

static stoke_status load_text(stoke_train_config *c, const char *text)
{
    stoke_train_config_defaults(c);
    return stoke_train_config_parse(c, text, strlen(text), "c.yaml");
}

/* 9: strtoull negates " -5" to 18446744073709551611; the seed takes digits only. */
static void test_seed_sign(void)
{
    stoke_train_config c;
    const char *bad[] = {" -5", "-5", " 5", "+5", "-0", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(load_env(&c, "SEED", bad[i]) == STOKE_ERR_ARG, "SEED='%s' taken as %llu", bad[i],
                  (unsigned long long)c.seed);
        CHECK_STR_CONTAINS(stoke_last_error(), "environment SEED=");
        CHECK_STR_CONTAINS(stoke_last_error(), "seed: '");
        CHECK_INT_EQ(c.seed, 1);
    }
    CHECK_INT_EQ(load_env(&c, "SEED", "18446744073709551615"), STOKE_OK);
    CHECK(c.seed == UINT64_MAX);
    /* a quoted scalar in a file keeps its blank: refused, at its line */
    CHECK_INT_EQ(load_text(&c, "epochs: 2\nseed: ' -1'\n"), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "c.yaml:2:7: seed: ' -1' is not a whole number");
    CHECK_INT_EQ(c.seed, 1);
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_set(&c, "seed", "-1", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_train_config_set(&c, "seed", "42", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(c.seed, 42);
}

/* 12: a device not of the form names its source (a file's line, the variable); one of
 * the form past the GPUs stoke addresses says the limit, not that the form is wrong. */
static void test_device_source(void)
{
    stoke_train_config c;
    CHECK_INT_EQ(load_text(&c, "epochs: 2\ndevice: gpu\n"), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(),
                       "c.yaml:2:9: device: 'gpu' is not auto, cpu, cuda or cuda:N");
    CHECK_INT_EQ(load_env(&c, "STOKE_DEVICE", "gpu"), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "environment STOKE_DEVICE=gpu: device: 'gpu' is not");
    CHECK_INT_EQ(load_env(&c, "STOKE_DEVICE", "cuda:99"), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "environment STOKE_DEVICE=cuda:99: device: "
                                           "'cuda:99': stoke addresses at most 16 GPUs, "
                                           "cuda:0 to cuda:15");
    CHECK(!strstr(stoke_last_error(), "is not auto"));
    CHECK_INT_EQ(load_text(&c, "device: cuda:16\n"), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "c.yaml:1:9: device: 'cuda:16': stoke addresses");
    const char *good[] = {"auto", "cpu", "cuda", "cuda:0", "cuda:15"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_INT_EQ(load_env(&c, "STOKE_DEVICE", good[i]), STOKE_OK);
        CHECK_STR_EQ(c.device, good[i]);
    }
}

int main(void)
{
    test_seed_sign();
    test_device_source();
    return CHECK_DONE();
}
