# LLM Planner service image. The build and start steps are the same as `make serve`.
FROM python:3.11-slim
RUN useradd --create-home planner
WORKDIR /srv/llm-planner
COPY pyproject.toml README.md ./
COPY estimator ./estimator
COPY app ./app
RUN pip install --no-cache-dir .
USER planner
EXPOSE 8000
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
CMD ["uvicorn", "app.main:app", "--host", "0.0.0.0", "--port", "8000"]
