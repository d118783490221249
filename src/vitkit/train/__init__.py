"""Training a ViT end to end: `train(config, out)`, one readable loop, and the run it writes.

The paper's recipe (App. B): Adam(W) with betas 0.9/0.999 and decoupled weight decay (none on norms,
biases, position embeddings and class token) or SGD with momentum for fine-tuning; linear warmup then
cosine or linear decay; global-norm gradient clipping at 1; gradient accumulation so a logical batch
of 4096 runs on a small machine. Checkpoints hold everything an exact resume needs.

    loop        train() and the run's lifecycle: setup, step, log, validate, save, finish
    inputs      the splits, the training batches in their reproducible order, the augmentation draws
    objectives  what the model learns: classification, or masked patch prediction (paper §4.6)
    optim       optimizer, learning-rate schedule, loss, EMA
    state       step checkpoints, the train-state schema, the metrics log, the resume checks
    trackers    where the scalars go (train.log_to): metrics.jsonl, csv, TensorBoard, W&B, MLflow
    plan        the block printed before training and its time estimate
    init        model.init: starting from a checkpoint's weights
    config, faults, distributed, finetune

Run directory (--out):
    run.yaml                      the resolved run config
    metrics.jsonl                 one JSON object per log line ("kind": "train" | "val")
    metrics.csv, tensorboard/, wandb/, trackers.json   what train.log_to adds (trackers.json: W&B / MLflow run ids)
    checkpoints/step_0000500/     config.json + model.safetensors (a model alone) and
                                  train_state.json (step, data order, ...) + train_state.pt (optimizer, RNG, EMA)
    final/                        the trained model (EMA weights when train.ema is set)
    summary.json, loss.png, accuracy.png, lr.png
"""

from vitkit.checkpoint.runs import step_checkpoints
from vitkit.train.inputs import augment_generator, first_batch_pixels, training_batches
from vitkit.train.loop import resume_config, train
from vitkit.train.optim import learning_rate, make_optimizer, param_groups, soft_cross_entropy, update_ema
from vitkit.train.plan import probe_images
from vitkit.train.state import check_train_state, find_checkpoint, load_checkpoint, read_metrics, save_checkpoint

__all__ = [
    "augment_generator",
    "check_train_state",
    "find_checkpoint",
    "first_batch_pixels",
    "learning_rate",
    "load_checkpoint",
    "make_optimizer",
    "param_groups",
    "probe_images",
    "read_metrics",
    "resume_config",
    "save_checkpoint",
    "soft_cross_entropy",
    "step_checkpoints",
    "train",
    "training_batches",
    "update_ema",
]
