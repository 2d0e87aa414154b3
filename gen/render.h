/* gen/render.h -- internal: the sandboxed Lua state that runs plan.lua and
 * the templates (implemented in gen/render.c and gen/sandbox.c).
 *
 * Template language (templates/engine.lua, etlua-like, no escaping):
 *   <% lua statements %>     code
 *   <%= lua expression %>    value inserted with tostring (nil is an error)
 *   <%# comment %>           dropped
 *   a '-' before '%>' (as in '-%>') eats the newline that follows.
 * Template globals: cfg (the config: keys of moegen_config_key_name, enums as
 * strings), opt (name, arch, compile, version, command_line), plan (what
 * plan.lua returned), include(name) (text of another embedded file), and the
 * whitelisted base functions: assert error ipairs pairs next select tonumber
 * tostring type math string table (no io, os, require, load, dofile,
 * loadfile, rawset..., debug, collectgarbage, setmetatable on strings; no
 * string.dump, math.random, math.randomseed). Each run/render gets fresh
 * copies of string, table and math and its own global table over these, so
 * nothing a chunk assigns outlives the call (results stored by
 * moegen_sandbox_run do).
 * NAME is the embedded name ("plan.lua", "router.cu.lt"); errors are
 * reported as "templates/NAME:LINE: message" (code EX_SOFTWARE), memory
 * exhaustion as "templates/NAME: memory limit exceeded".
 */
#ifndef MOEGEN_GEN_RENDER_H
#define MOEGEN_GEN_RENDER_H

#include <stddef.h>

#include "moegen/config.h"

typedef struct moegen_sandbox moegen_sandbox;

/* Default caps: 64 MiB of Lua memory, 200 million VM instructions per call. */
#define MOEGEN_SANDBOX_MEMORY (64u << 20)
#define MOEGEN_SANDBOX_INSTRUCTIONS 200000000L

/* Opens a sandbox with the given caps (0 = default) and loads the embedded
 * template engine. */
int moegen_sandbox_open(moegen_sandbox **out, size_t memory_limit, long instruction_limit,
                        moegen_error *err);
void moegen_sandbox_close(moegen_sandbox *sb);

/* Sets global `name` of the template environment to the config table / a
 * string table. (Used for cfg and opt.) */
int moegen_sandbox_set_config(moegen_sandbox *sb, const moegen_config *cfg, moegen_error *err);
int moegen_sandbox_set_strings(moegen_sandbox *sb, const char *name, const char *const *kv,
                               moegen_error *err); /* kv: key, value, ..., NULL */

/* Runs a Lua chunk (e.g. plan.lua) named `chunk_name` in the environment and
 * stores its single table result as global `result_name`. */
int moegen_sandbox_run(moegen_sandbox *sb, const char *chunk_name, const char *code,
                       const char *result_name, moegen_error *err);

/* Renders template text named `template_name`; *out is malloc'd. */
int moegen_sandbox_render(moegen_sandbox *sb, const char *template_name, const char *text,
                          char **out, moegen_error *err);

/* Reads integer field `path` ("plan.router.threads") from the environment. */
int moegen_sandbox_get_int(moegen_sandbox *sb, const char *path, long *value, moegen_error *err);

/* Embedded files (the templates directory, generated at build time by
 * gen/embed.c). */
typedef struct moegen_embedded_file {
  const char *name; /* "router.cu.lt" */
  const char *data; /* NUL-terminated */
  size_t size;
} moegen_embedded_file;
extern const moegen_embedded_file moegen_embedded_files[]; /* ends with {NULL} */
const moegen_embedded_file *moegen_embedded_find(const char *name);

#endif
