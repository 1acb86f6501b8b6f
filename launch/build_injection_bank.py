"""Build the injection bank of annealed teacher-trajectory injection from a run's configs (in-process teachers).

    python launch/build_injection_bank.py --config configs/recipes/student_opd.yaml \
        --config configs/methods/annealed_injection.yaml --output runs/injection_bank.pt

Give the same --config files and --set overrides as the run: the bank holds one verified answer of the
label-routed teacher per prompt of data.train_file, keyed by the prompt's token ids under the run's tokenizer
and template (`dnmopd.trainer.injection.builder`). A GPU is advised.
"""

import argparse
import logging
import sys
from pathlib import Path

from dnmopd.config.cli import add_config_arguments, config_from_arguments


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_config_arguments(parser, "run config YAML")
    parser.add_argument("--output", required=True, type=Path, help="bank file to write (e.g. runs/bank.pt)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from dnmopd.trainer.config import TrainerConfig
    from dnmopd.trainer.injection.builder import build_bank

    config = config_from_arguments(TrainerConfig, args, building_bank=True)
    if config is None:
        return 2
    build_bank(config, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
