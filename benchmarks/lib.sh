# Source me: the timing helpers the benchmark scripts share.
now() { date +%s.%N; }
# a port free now, picked by the kernel (never a random one: another run may hold it)
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib/port.sh"
port() { free_port; }
# median of the numbers on stdin, one a line
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# medof "1.2 3.4 2.2 ": the median of a space-separated list
medof() { tr ' ' '\n' <<<"$1" | grep . | median; }
