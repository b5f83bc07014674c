# Sourced by the reproduce_*.sh scripts after they set default_minutes and default_out: reads their
# arguments [PTB_LM_DIR] [MINUTES] [OUT_DIR], moves to the checkout and names the gold trees
# ($NLTK_TREEBANK, default ../shared/data/nltk/corpora/treebank/combined).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data/ptb_lm}
minutes=${2:-$default_minutes}
out=${3:-$default_out}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
mkdir -p "$out"
