"""The Gemini API (``generateContent``): Gemini CLI and the google-genai SDKs."""
