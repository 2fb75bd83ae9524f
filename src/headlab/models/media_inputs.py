"""Reading a model's image and audio input files: the one place that opens them.

    read_images(path)   an image file, or a folder of them (its image files, by name), each as
                        an RGB ``PIL.Image`` with its name; Pillow reads them (bounded by its
                        decompression-bomb limit: an image of more pixels is refused)
    read_wav(path)      a WAV file (PCM, 8 to 32 bits, any channels, mixed to mono) through the
                        standard library's ``wave``: (samples,) float32 in [-1, 1] and its rate

Every failure is a ValueError of one line naming the file and what was expected, raised before
any model loads (the model's own processor resizes and normalises them afterwards).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch

#: The file endings read as images in a folder.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm")
#: At most this many images from one folder.
MAX_IMAGES = 10_000


def read_images(path: str | Path, what: str = "image") -> list[tuple[str, object]]:
    """[(name, RGB PIL image)] of ``path``, a file or a folder of image files (sorted by name).
    ValueError naming the first file that is missing or not a readable image (``what``: the
    flag or argument the path came from)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ValueError(
                f"{what} {path}: expected image files ({', '.join(IMAGE_SUFFIXES)}) in the "
                "folder, got none"
            )
        if len(files) > MAX_IMAGES:
            raise ValueError(f"{what} {path}: at most {MAX_IMAGES} images, got {len(files)}")
    elif path.is_file():
        files = [path]
    else:
        raise ValueError(f"{what} {path}: expected an image file or a folder, got nothing there")
    return [(file.name, _open_image(file, what)) for file in files]


def _open_image(file: Path, what: str):
    import warnings

    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(file) as image:
                image.load()
                return image.convert("RGB")
    except (
        OSError,
        ValueError,
        SyntaxError,
        Image.DecompressionBombWarning,
        Image.DecompressionBombError,
    ) as error:
        why = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{what} {file}: not a readable image ({why})") from None


def read_wav(path: str | Path, what: str = "audio") -> tuple[torch.Tensor, int]:
    """((samples,) float32 mono waveform in [-1, 1], sample rate) of a PCM WAV file. ValueError
    naming the file when it is missing, not a PCM WAV, or empty."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} {path}: expected a WAV file, got nothing there")
    try:
        with wave.open(str(path), "rb") as reader:
            channels, width = reader.getnchannels(), reader.getsampwidth()
            rate, frames = reader.getframerate(), reader.getnframes()
            data = reader.readframes(frames)
    except (wave.Error, EOFError, OSError) as error:
        raise ValueError(f"{what} {path}: not a PCM WAV file ({error})") from None
    if frames == 0 or not data:
        raise ValueError(f"{what} {path}: expected audio samples, got an empty WAV file")
    if width not in (1, 2, 3, 4):
        raise ValueError(f"{what} {path}: expected 8 to 32-bit samples, got {8 * width}-bit")
    samples = _pcm(data, width).reshape(-1, channels).mean(axis=1)
    return torch.from_numpy(samples.astype(np.float32)), int(rate)


def _pcm(data: bytes, width: int) -> np.ndarray:
    """Little-endian PCM samples of ``width`` bytes as floats in [-1, 1] (8-bit is unsigned)."""
    usable = len(data) - len(data) % width
    raw = np.frombuffer(data[:usable], dtype=np.uint8)
    if width == 1:
        return (raw.astype(np.float64) - 128.0) / 128.0
    if width == 3:  # 24-bit: sign-extend each 3-byte sample
        triples = raw.reshape(-1, 3).astype(np.int32)
        value = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        value = np.where(value >= 2**23, value - 2**24, value)
        return value / float(2**23)
    kind = np.dtype(f"<i{width}")
    return np.frombuffer(data[:usable], dtype=kind).astype(np.float64) / float(2 ** (8 * width - 1))
