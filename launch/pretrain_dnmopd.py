"""Train with dnmopd: on-policy distillation of a student (run.mode opd), a GRPO teacher (grpo) or SeqKD-SFT (sft).

    torchrun --nproc_per_node 8 launch/pretrain_dnmopd.py --config configs/recipes/student_opd.yaml \
        --set run.name=qwen3.5-4b_dn_mopd_s42 --set student.hf_path=/models/Qwen3.5-4B

Several --config files are merged in order; --set key.path=value overrides win. The resolved config is
written to <run.output_dir>/<run.name>/config.yaml; a run continues from its newest complete checkpoint, refusing
changed inputs unless checkpoint.allow_changes accepts them (docs/resume.md). One trainer at a time per run folder;
a worker dies with its launcher.
"""

import argparse
import sys

from dnmopd.config.cli import add_config_arguments, config_from_arguments
from dnmopd.logs import setup_logging


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    args = parser.parse_args(argv)
    from dnmopd.trainer.run_lock import die_with_launcher

    die_with_launcher()
    setup_logging()

    from dnmopd.config import dump_yaml
    from dnmopd.trainer.config import TrainerConfig

    config = config_from_arguments(TrainerConfig, args)
    if config is None:
        return 2
    if args.print_config:
        print(dump_yaml(config), end="")
        return 0
    from dnmopd.trainer.entry import run

    run(config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
