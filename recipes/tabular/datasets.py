"""Tables: California housing and Adult in the data cache, three that scikit-learn ships. Each one's ``info`` says
how the recipes read it (``kind``: a CSV file with a header, Adult's two UCI files, or a scikit-learn loader) and its
target column."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, Download, dataset

dataset(DatasetInfo(
    name="california-housing", domain="tabular", source="cache", path="tabular/california_housing/housing.csv",
    description="California housing (1990 census, handson-ml2 copy): 20,640 block groups, 9 features incl. "
                "ocean_proximity, 207 missing total_bedrooms",
    split="80/20, random_state 42 (split_seed); validation 10% of train by a hash of each row", metric="RMSE (USD)",
    downloads=(Download("https://raw.githubusercontent.com/ageron/handson-ml2/1e2115277b50f6c584cd668fa30e3af309a5b136"
                        "/datasets/housing/housing.csv",
                        "8a3727f4cf54ac1a327f69b1d5b4db54c5834ea81c6e4efc0d163300022a685e"),),
    info={"kind": "csv", "target": "median_house_value"}))
dataset(DatasetInfo(
    name="adult", domain="tabular", source="cache", path="tabular/adult",
    description="UCI Adult / census income: 32,561 train + 16,281 test rows, 14 features, income >50K",
    split="adult.test test (labels end with '.'); validation 10% of adult.data by a hash of each row", metric="accuracy, macro-F1, ROC-AUC",
    downloads=(Download("https://raw.githubusercontent.com/shap/shap/df974a1966294b9c7acebb1373fd6dc5445d1d3d/data/"
                        "adult.data", "df25a4e32ed6f1bd4b3910d21a7bd661a09061eced7cb45555a519d9667cc87b"),
               Download("https://raw.githubusercontent.com/j2kun/boosting/342ad93fd0d898761f309b4c1986405c9e79b41c/"
                        "data/adult.test", "5c8e678e04c82a07182bbcb6667c9a06faaba123a55b409af7c5d21fb45784b3")),
    info={"kind": "adult", "target": "income",
          "columns": ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                      "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
                      "native-country", "income")}))
for _name, _loader, _what, _metric in (
        ("diabetes", "load_diabetes", "scikit-learn's diabetes: 442 patients, 10 standardised features, disease "
                                      "progression", "RMSE"),
        ("breast-cancer", "load_breast_cancer", "scikit-learn's Wisconsin breast cancer: 569 tumours, 30 features, "
                                                "malignant/benign", "accuracy, ROC-AUC"),
        ("wine", "load_wine", "scikit-learn's wine: 178 wines, 13 chemical features, 3 cultivars",
         "accuracy, macro-F1")):
    dataset(DatasetInfo(name=_name, domain="tabular", source="bundled", description=_what,
                         split="80/20, random_state 42 (stratified for classes); validation 10% of train by a hash of each row",
                         metric=_metric, info={"kind": "sklearn", "loader": _loader, "target": "target"}))
