package images

import (
	"debug/elf"
	"fmt"
)

// CheckStatic returns nil when path is an ELF executable that needs no
// dynamic loader and no shared library, an error matching ErrNotStatic when
// it does, and another error when it cannot be read as ELF.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("check %s is static: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("check %s is static: ELF type %v is not an executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w: it has a program interpreter", path, ErrNotStatic)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("check %s is static: %w", path, err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s: %w: it needs %v", path, ErrNotStatic, libs)
	}
	return nil
}
