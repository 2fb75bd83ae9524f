"""Reading image and audio input files: against Pillow's and the standard library's writers, and
one-line refusals of what is not an image or a WAV."""

from __future__ import annotations

import wave

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.models.media_inputs import read_images, read_wav


def _write_wav(path, samples: np.ndarray, rate: int, width: int, channels: int) -> None:
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(samples.tobytes())


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(-32768, 32767), min_size=2, max_size=40).filter(lambda v: len(v) % 2 == 0),
    st.sampled_from([8000, 16000, 44100]),
)
def test_sixteen_bit_stereo_wav_is_read_as_the_mean_of_its_channels(tmp_path_factory, values, rate):
    path = tmp_path_factory.mktemp("wav") / "a.wav"
    samples = np.array(values, dtype="<i2")
    _write_wav(path, samples, rate, 2, 2)
    waveform, got_rate = read_wav(path)
    want = samples.reshape(-1, 2).astype(np.float64).mean(axis=1) / 32768
    assert got_rate == rate
    assert np.allclose(waveform.numpy(), want, atol=1e-7)


def test_eight_and_twenty_four_bit_wavs_are_scaled_to_unit_range(tmp_path):
    _write_wav(tmp_path / "u8.wav", np.array([0, 128, 255], dtype=np.uint8), 16000, 1, 1)
    assert np.allclose(read_wav(tmp_path / "u8.wav")[0].numpy(), [-1.0, 0.0, 127 / 128])
    values = [-(2**23), -1, 0, 2**23 - 1]
    raw = b"".join(int(v).to_bytes(3, "little", signed=True) for v in values)
    with wave.open(str(tmp_path / "s24.wav"), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(3)
        writer.setframerate(16000)
        writer.writeframes(raw)
    assert np.allclose(read_wav(tmp_path / "s24.wav")[0].numpy(), np.array(values) / 2**23)


def test_files_that_are_not_wavs_are_refused_in_one_line(tmp_path):
    (tmp_path / "not.wav").write_bytes(b"RIFF0000WAVEnope")
    for path, why in (
        (tmp_path / "not.wav", "not a PCM WAV file"),
        (tmp_path / "missing.wav", "got nothing there"),
    ):
        with pytest.raises(ValueError, match=why) as error:
            read_wav(path, "--audio")
        assert "\n" not in str(error.value) and str(error.value).startswith("--audio")
    _write_wav(tmp_path / "empty.wav", np.zeros(0, dtype="<i2"), 16000, 2, 1)
    with pytest.raises(ValueError, match="empty WAV"):
        read_wav(tmp_path / "empty.wav")


def test_an_image_file_and_a_folder_of_them_are_read_in_name_order(tmp_path):
    from PIL import Image

    pixels = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    Image.fromarray(pixels).save(tmp_path / "b.png")
    Image.fromarray(pixels[:, :, 0]).save(tmp_path / "a.png")  # grey: read as RGB
    (tmp_path / "notes.txt").write_text("not an image")
    images = read_images(tmp_path)
    assert [name for name, _ in images] == ["a.png", "b.png"]
    assert np.array_equal(np.asarray(images[1][1]), pixels)
    assert np.asarray(images[0][1]).shape == (5, 7, 3)
    assert [name for name, _ in read_images(tmp_path / "b.png")] == ["b.png"]


def test_unreadable_images_and_empty_folders_are_refused_in_one_line(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ValueError, match=r"broken\.png: not a readable image"):
        read_images(tmp_path / "broken.png", "--image")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="expected image files"):
        read_images(empty, "--image")
    with pytest.raises(ValueError, match="got nothing there"):
        read_images(tmp_path / "missing.png", "--image")
