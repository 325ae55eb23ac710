package launch

import "testing"

// The job epilog's environment as slurmd sets it (prep/script's slurmd
// part, Slurm 22.05 to 26.05): SLURM_JOB_EXIT_CODE the batch script's wait
// status, SLURM_JOB_DERIVED_EC the steps' highest; not set when slurmd
// does not know the exit code.
func TestJobExitFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if je := JobExitFromEnv(env(map[string]string{"SLURM_JOB_EXIT_CODE": "768", "SLURM_JOB_EXIT_CODE2": "3:0", "SLURM_JOB_DERIVED_EC": "9"})); je == nil ||
		*je != (JobExit{Status: 768, Derived: 9}) || WaitCode(je.Status) != 3 || WaitSignal(je.Derived) != 9 {
		t.Errorf("exit 3: %+v", je)
	}
	if je := JobExitFromEnv(env(map[string]string{"SLURM_JOB_EXIT_CODE": "15"})); je == nil || WaitSignal(je.Status) != 15 || WaitCode(je.Status) != 0 {
		t.Errorf("signal 15: %+v", je)
	}
	if je := JobExitFromEnv(env(nil)); je != nil {
		t.Errorf("not set: %+v", je)
	}
}
