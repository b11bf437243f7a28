"""The housing-like table the tabular tests write out: long-tailed counts whose ratio sets the price, coordinates, a
text category and an id column, drawn from the caller's generator in a fixed order (each test adds its own columns
and gaps after it, with the same generator)."""
import numpy as np
import pandas as pd


def houses(rng: np.random.Generator, n: int, lat_slope: float = 2_000) -> pd.DataFrame:
    """``n`` rows: id (distinct integers in order: dropped as an id), households, total_rooms, latitude, longitude,
    coast and price (40,000 x rooms per household, 30,000 more near the ocean, ``lat_slope`` less a degree north;
    noise 10,000, at least 10,000)."""
    households = np.round(rng.lognormal(6, 0.8, n)) + 10  # long-tailed counts, as census districts are
    rooms = households * rng.uniform(3, 8, n)
    lat, lon = rng.uniform(32, 42, n), rng.uniform(-124, -114, n)
    coast = np.where(lon < -121, "NEAR OCEAN", np.where(lat > 38, "INLAND", "<1H OCEAN"))
    price = 40_000 * rooms / households + 30_000 * (coast == "NEAR OCEAN") - lat_slope * (lat - 32) \
        + rng.normal(0, 10_000, n)
    return pd.DataFrame({"id": np.arange(n), "households": households, "total_rooms": rooms.round(),
                         "latitude": lat, "longitude": lon, "coast": coast, "price": price.clip(10_000)})
