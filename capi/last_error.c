// The text of the last error, kept per calling thread so concurrent callers never see each
// other's messages. Go sets it through br_set_error; C and Python read it with br_last_error.
#include <stddef.h>
#include <string.h>

#define BR_ERROR_TEXT_MAX 1024

static __thread char br_error_text[BR_ERROR_TEXT_MAX];

__attribute__((visibility("hidden"))) void br_set_error(const char *text, size_t len) {
	if (len >= BR_ERROR_TEXT_MAX) {
		len = BR_ERROR_TEXT_MAX - 1;
	}
	memcpy(br_error_text, text, len);
	br_error_text[len] = '\0';
}

const char *br_last_error(void) { return br_error_text; }
