#pragma once
// Placeholder: filled in by the issue 4 work on edit.
