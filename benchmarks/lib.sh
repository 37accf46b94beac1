# Source me: the timing helpers the benchmark scripts share.
now() { date +%s.%N; }
port() { echo $((20000 + RANDOM % 30000)); }
# median of the numbers on stdin, one a line
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# medof "1.2 3.4 2.2 ": the median of a space-separated list
medof() { tr ' ' '\n' <<<"$1" | grep . | median; }
