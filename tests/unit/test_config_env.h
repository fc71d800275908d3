/* A fake environment for config tests: variables, zones and files are tables. */
#ifndef TEST_CONFIG_ENV_H
#define TEST_CONFIG_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static const char *const fake_vars[][2] = {
    {"ANTHROPIC_KEY", "sk-ant-api03-aaaaaaaaaaaaaaaaaaaabcd"},
    {"RELAY_KEY", "relay-secret-123456"},
    {"ALICE_KEY", "alice-key-0001"},
    {"BOB_KEY", "bob-key-0002"},
    {"TEAM", "infra"},
    {"EMPTY", ""},
};

static const char *
fake_getenv(void *ctx, const char *name)
{
    const char *const(*extra)[2] = ctx;
    for (size_t i = 0; extra != NULL && extra[i][0] != NULL; i++) {
        if (strcmp(extra[i][0], name) == 0)
            return extra[i][1];
    }
    for (size_t i = 0; i < sizeof(fake_vars) / sizeof(fake_vars[0]); i++) {
        if (strcmp(fake_vars[i][0], name) == 0)
            return fake_vars[i][1];
    }
    return NULL;
}

/* Two zones are known, read from tzdata; the system's is UTC whatever the machine's is. */
static char *
fake_read_zone(void *ctx, const char *name, size_t *len)
{
    (void)ctx;
    if (name == NULL)
        name = "UTC";
    else if (strcmp(name, "Europe/Berlin") != 0 && strcmp(name, "UTC") != 0)
        return NULL;
    char path[64];
    snprintf(path, sizeof(path), "/usr/share/zoneinfo/%s", name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *bytes = malloc(64 * 1024);
    *len = fread(bytes, 1, 64 * 1024, f);
    fclose(f);
    return bytes;
}

static bool
fake_file_readable(void *ctx, const char *path)
{
    (void)ctx;
    return strncmp(path, "/ok/", 4) == 0;
}

static const sl_config_env_t test_env = {fake_getenv, fake_read_zone, fake_file_readable, NULL};

/* The config yaml describes in the fake environment (the caller frees it), or NULL when it has problems. */
static inline sl_config_t *
test_config_of(const char *yaml)
{
    sl_config_result_t res = sl_config_parse(yaml, strlen(yaml), NULL, &test_env);
    sl_config_t *c = res.errors.len == 0 ? res.config : NULL;
    if (c != NULL)
        res.config = NULL;
    sl_config_result_free(&res);
    return c;
}

#endif
