/* Replays every file of the given corpus directories through the fuzz target
 * and prints one TAP line per directory. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	struct stat st;
	if (fstat(fileno(f), &st) < 0 || st.st_size > (1 << 24)) {
		fclose(f);
		return -1;
	}
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
	fclose(f);
	if (!buf || n != (size_t)st.st_size) {
		free(buf);
		return -1;
	}
	LLVMFuzzerTestOneInput(buf, n);   /* a crash or abort fails the test */
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;
	printf("1..%d\n", argc - 1);
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		int count = 0, bad = 0;
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", argv[i], de->d_name);
			if (replay_file(p) < 0)
				bad++;
			count++;
		}
		if (d)
			closedir(d);
		int ok = d && count > 0 && !bad;
		failed += !ok;
		printf("%s %d - replay %s (%d inputs)\n", ok ? "ok" : "not ok", i, argv[i], count);
	}
	return failed ? 1 : 0;
}
