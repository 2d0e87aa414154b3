/* gen/options.c -- checks of the generation options that the CLI and
 * moegen_generate run before anything is rendered or written. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>

#include "moegen/moegen.h"
#include "shared.h"

#define STRING(x) #x
#define TEXT_OF(x) STRING(x)

/* Keywords of C (C23, without the _Reserved ones: a name may not start
 * with '_') and C++ (C++23), alternative operator spellings included. */
static const char *const keywords[] = {
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "co_await", "co_return",
    "co_yield", "compl", "concept", "const", "const_cast", "consteval", "constexpr", "constinit",
    "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum",
    "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline",
    "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr",
    "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
    "requires", "restrict", "return", "short", "signed", "sizeof", "static", "static_assert",
    "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true", "try",
    "typedef", "typeid", "typename", "typeof", "typeof_unqual", "union", "unsigned", "using",
    "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", NULL};

const char *moegen_name_problem(const char *name) {
  if (!name || !*name) return "empty";
  if (!(isalpha((unsigned char)*name) || *name == '_')) return "not a C identifier";
  for (const char *p = name; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_')) return "not a C identifier";
  if (strlen(name) > MOEGEN_MAX_NAME) return "longer than " TEXT_OF(MOEGEN_MAX_NAME) " characters";
  if (*name == '_')
    return "reserved: identifiers that start with '_' (and so NAME_EXPERTS, ...) are the C "
           "implementation's";
  for (const char *const *k = keywords; *k; k++)
    if (strcmp(name, *k) == 0) return "a C or C++ keyword";
  if (strncasecmp(name, "moegen", 6) == 0 && (name[6] == 0 || name[6] == '_'))
    return "reserved: its symbols (NAME_image, NAME_module_create, NAME_EXPERTS, ...) would "
           "fall among the runtime's moegen_* and MOEGEN_* names";
  return NULL;
}

/* Whether arch has the form sm_XY or sm_XYZ (no leading zero) from sm_50
 * to sm_199, with an optional a (from sm_90) or f (from sm_100) suffix. */
static bool arch_form(const char *arch) {
  if (strncmp(arch, "sm_", 3) != 0 || arch[3] < '1' || arch[3] > '9') return false;
  int number = 0, digits = 0;
  const char *p = arch + 3;
  for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++) number = number * 10 + (*p - '0');
  if (digits < 2 || digits > 3 || number < 50 || number > 199) return false;
  if (*p == 'a' && number >= 90) p++;
  else if (*p == 'f' && number >= 100) p++;
  return *p == 0;
}

/* Whether arch is one of the space-separated names in list. */
static bool listed(const char *list, const char *arch) {
  size_t n = strlen(arch);
  for (const char *p = list; (p = strstr(p, arch)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
  return false;
}

int moegen_arch_problem(const char *arch, moegen_compile_mode mode, char *why, size_t size) {
  if (!arch || !arch_form(arch)) {
    snprintf(why, size, "expected sm_XY or sm_XYZ from sm_50 to sm_199, with an optional a "
                        "(from sm_90) or f (from sm_100) suffix");
    return EX_USAGE;
  }
  char archs[512];
  int major, minor;
  if (mode == MOEGEN_COMPILE_NVCC || moegen_nvrtc_archs(archs, sizeof archs) != MOEGEN_OK ||
      listed(archs, arch) || moegen_nvrtc_version(&major, &minor) != MOEGEN_OK)
    return 0;
  snprintf(why, size, "NVRTC %d.%d compiles for %s", major, minor, archs);
  return EX_USAGE;
}
