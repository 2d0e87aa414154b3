/* examples/common/preset.h -- the config of a built-in preset, for the
 * examples that link the generator (libmoegen). */
#ifndef MOEGEN_EXAMPLE_PRESET_H
#define MOEGEN_EXAMPLE_PRESET_H

#include <stdio.h>
#include <stdlib.h>

#include "moegen/moegen.h"

/* moegen's preset `name` (moegen --list-presets); exits 1 with moegen's
 * message if there is none. */
static inline moegen_config example_preset(const char *name) {
  moegen_config cfg;
  moegen_error err = {0};
  moegen_config_defaults(&cfg);
  if (moegen_config_preset(&cfg, name, &err) != 0) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  return cfg;
}

#endif
